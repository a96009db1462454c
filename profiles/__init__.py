"""Skinflint profiles package."""
