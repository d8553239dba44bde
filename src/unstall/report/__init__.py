"""Plots, HTML reports and trace exports. Imports the other parts; nothing imports it back."""
