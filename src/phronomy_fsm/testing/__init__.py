"""Test support shipped with the package, for testing applications built on phronomy_fsm."""
