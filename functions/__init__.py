"""Skinflint functions package."""
