"""Skinflint cdk package."""
