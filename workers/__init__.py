"""Skinflint workers package."""
