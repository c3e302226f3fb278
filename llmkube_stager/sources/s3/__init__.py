"""s3:// sources: `source.py` (the Source and its fetcher), `settings.py`
(pure parsing and checks of the S3 variables), `clients.py` (the boto3
clients), `session.py` (botocore fed only what config/ collected, every
request sent by the agent), `errors.py` (botocore failures -> reasons),
`listing.py` (ListObjectsV2 of a prefix). boto3 is imported only when the
origin is asked."""
