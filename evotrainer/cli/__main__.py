"""``python -m evotrainer.cli``: the same as the ``evotrainer`` script."""

from evotrainer.cli.app import main

main()
