"""Skinflint gpu_fleet package."""
