"""``python -m mechinterp_icr.cli ...``: the ``icr`` command line."""

from mechinterp_icr.cli import main

if __name__ == "__main__":  # pragma: no cover
    main()
