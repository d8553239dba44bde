"""`python -m unstall` runs the same CLI as the `unstall` console script."""

from unstall.cli.app import main

if __name__ == "__main__":
    main()
