"""``python -m phronomy_fsm.cli`` runs the command line."""

from phronomy_fsm.cli import main

main()
