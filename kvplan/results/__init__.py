"""The one result schema (typed records) and its JSONL reader and writer."""

from kvplan.results.io import dumps, read_jsonl, read_record, write_jsonl
from kvplan.results.schema import REQUIRED, SCHEMA, ResultRecord, error_record, make_record

__all__ = [
    "REQUIRED",
    "SCHEMA",
    "ResultRecord",
    "dumps",
    "error_record",
    "make_record",
    "read_jsonl",
    "read_record",
    "write_jsonl",
]
