"""Machinery every layer may use and users never import."""
