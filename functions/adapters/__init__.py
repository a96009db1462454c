"""Thin AWS adapters with injected boto3 clients; each wraps ``ClientError`` into a
:mod:`functions.errors` type. Nothing here decides anything."""
