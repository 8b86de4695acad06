"""Figures (plotly), offline circuitsvis views and the HTML report."""
