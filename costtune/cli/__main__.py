"""``python -m costtune.cli``: the same as the ``costtune`` command."""

from costtune.cli import main

main()
