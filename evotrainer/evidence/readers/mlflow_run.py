"""A run in an MLflow tracking store, by its run id (HOME's store, or ``$EVOTRAINER_MLFLOW_URI``).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd

from evotrainer.core.errors import RunNotFound
from evotrainer.core.redact import mask
from evotrainer.core.tracking import tracking_uri
from evotrainer.evidence.mapping import FieldMap
from evotrainer.evidence.model import (
    ROLLOUT_SCHEMA,
    Evidence,
)
from evotrainer.evidence.readers.base import ACCEPTED, _metrics_frame, _read_parquets, _resolve, _Skips


def read_mlflow_run(run_id: str, home: Path, fields: FieldMap | None = None) -> Evidence:
    """A run in the tracking store (SQLite under ``home`` or ``$EVOTRAINER_MLFLOW_URI``): metric histories
    pivoted by step, rollouts from the run's ``rollouts/`` artifacts. Uses the client directly rather than
    ``Tracker`` so that reading never creates an experiment on a shared server."""
    os.environ.setdefault("MLFLOW_ENABLE_TELEMETRY", "false")
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient


    uri = tracking_uri(home)
    try:
        client = MlflowClient(tracking_uri=uri)
        run = client.get_run(run_id)
    except MlflowException as e:
        if e.error_code == "RESOURCE_DOES_NOT_EXIST":
            raise RunNotFound(f"no MLflow run '{run_id}' in {mask(uri)}; accepted: {ACCEPTED}") from None
        # an unreachable server, a URI MLflow cannot use: not "no such run", say what went wrong
        raise RunNotFound(f"could not read MLflow run '{run_id}' from {mask(uri)} ($EVOTRAINER_MLFLOW_URI: a tracking "
                          f"server such as http://host:5000, or unset for HOME's mlflow.db): "
                          f"{mask(str(e.message).strip().splitlines()[0][:300])}") from None
    rows: dict[int, dict[str, Any]] = {}
    for key in run.data.metrics:
        for m in sorted(client.get_metric_history(run_id, key), key=lambda m: m.timestamp):
            rows.setdefault(int(m.step), {"step": int(m.step)})[key] = m.value
    skips = _Skips()
    with tempfile.TemporaryDirectory() as tmp:
        files: list[Path] = []
        try:
            if client.list_artifacts(run_id, "rollouts"):
                files = sorted(Path(client.download_artifacts(run_id, "rollouts", tmp)).glob("*.parquet"))
        except (MlflowException, OSError) as e:
            skips.file(Path(f"mlflow:{run_id}/rollouts"), str(e))
        frames = _read_parquets(files, skips)
    rollouts = pd.concat(frames, ignore_index=True) if frames else ROLLOUT_SCHEMA.empty_table().to_pandas()
    meta = {"run_id": run_id, "tracking_uri": mask(tracking_uri(home)), "status": run.info.status,
            "tags": dict(run.data.tags), **skips.meta()}
    return _resolve(Evidence(metrics=_metrics_frame(rows), rollouts=rollouts, source="mlflow",
                             run=run.info.run_name or run_id, meta=meta), fields)


