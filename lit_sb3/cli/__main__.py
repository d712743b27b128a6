"""``python -m lit_sb3.cli``: the ``lit-sb3`` command."""

from lit_sb3.cli import main

main()
