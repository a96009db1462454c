"""Skinflint loadtest package."""
