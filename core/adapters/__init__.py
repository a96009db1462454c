"""Thin AWS adapters with injected boto3 clients; each wraps botocore's errors (``_aws.AWS_ERRORS``:
a service's ``ClientError`` or a network-level ``BotoCoreError``) into a
:mod:`core.errors` type. Nothing here decides anything."""
