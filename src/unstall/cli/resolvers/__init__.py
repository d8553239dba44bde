"""Resolvers: command-line text (names, files, KEY=VALUE options, user code) into the objects
the front doors take. One module per part; nothing below them reads a file or looks a name up."""
