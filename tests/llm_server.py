"""A scripted OpenAI-compatible Chat Completions server on 127.0.0.1, so LLM tests go through real HTTP.

Standard library only. Each ``POST /v1/chat/completions`` gets the next scripted item: a string becomes the
message content of a proper ``chat.completion``; an int is answered as that HTTP status with an OpenAI-style
error body; ``(status, headers)`` is that status with those headers (``(429, {"Retry-After": "1"})``);
``"hang"`` waits (until the server stops) so the client times out; ``"drip"`` sends the headers of a valid answer
and then its body one byte every ``drip_s`` seconds. ``usage=None`` leaves ``usage`` out of answers. Past the
script it answers 500, so a test can never loop on it. Every request body and its headers are recorded.

    with ScriptedLLM(['{"proposals": []}']) as llm:
        LLMSettings(base_url=llm.base_url, model="scripted")
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HANG = "hang"
DRIP = "drip"


class ScriptedLLM:
    def __init__(self, responses: list[Any], *, reject_response_format: bool = False,
                 usage: tuple[int, int] | None = (100, 20), hang_s: float = 30.0, drip_s: float = 2.0):
        self.responses = list(responses)
        self.reject_response_format = reject_response_format
        self.usage, self.hang_s, self.drip_s = usage, hang_s, drip_s
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self._lock, self._stop = threading.Lock(), threading.Event()
        self._served = 0
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        assert self._server is not None, "use ScriptedLLM as a context manager"
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def _next(self, body: dict[str, Any]) -> Any:
        """What to answer to one request (under the lock: the handler threads run concurrently)."""
        with self._lock:
            if self.reject_response_format and "response_format" in body:
                return 400
            if self._served >= len(self.responses):
                return 500
            self._served += 1
            return self.responses[self._served - 1]

    def __enter__(self) -> ScriptedLLM:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep pytest output clean
                pass

            def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None,
                      drip: bool = False) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    if not drip:
                        self.wfile.write(data)
                        return
                    for i in range(len(data)):
                        if owner._stop.wait(owner.drip_s):
                            return
                        self.wfile.write(data[i:i + 1])
                        self.wfile.flush()
                except OSError:  # the client gave up (timeout): nothing to answer to
                    pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                if self.path.rstrip("/") != "/v1/chat/completions":
                    return self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                length = min(int(self.headers.get("Content-Length") or 0), 4 << 20)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except ValueError:
                    return self._send(400, {"error": {"message": "body is not JSON", "type": "invalid_request_error"}})
                with owner._lock:
                    owner.requests.append(body)
                    owner.headers.append({k.lower(): v for k, v in self.headers.items()})
                item = owner._next(body)
                if item == HANG:
                    owner._stop.wait(owner.hang_s)
                    return self._send(500, {"error": {"message": "hung", "type": "server_error"}})
                status, extra = item if isinstance(item, tuple) else (item, None)
                if isinstance(status, int):
                    kind = "invalid_request_error" if status < 500 else "server_error"
                    return self._send(status, {"error": {"message": f"scripted {status}", "type": kind}}, extra)
                answer = {
                    "id": f"chatcmpl-{len(owner.requests)}", "object": "chat.completion", "created": int(time.time()),
                    "model": body.get("model", "scripted"),
                    "choices": [{"index": 0, "message": {"role": "assistant",
                                                         "content": '{"proposals": []}' if item == DRIP else item},
                                 "finish_reason": "stop"}]}
                if owner.usage is not None:
                    prompt, completion = owner.usage
                    answer["usage"] = {"prompt_tokens": prompt, "completion_tokens": completion,
                                       "total_tokens": prompt + completion}
                self._send(200, answer, drip=item == DRIP)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="scripted-llm", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()  # release hanging handlers first
        assert self._server is not None and self._thread is not None
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
