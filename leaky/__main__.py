"""`python -m leaky ...` is the same as the `leaky` command."""
from leaky.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
