"""Generated transition tables, one module per spec in ``fsm_specs/``.

Do not edit these modules; regenerate them with ``phronomy-fsm generate`` and check them
with ``phronomy-fsm generate --check``.
"""
