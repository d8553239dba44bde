"""The `unstall` command line: one module per command group (nothing imports this package)."""
