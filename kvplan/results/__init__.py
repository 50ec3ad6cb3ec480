"""The one result schema and its JSONL reader and writer."""

from kvplan.results.io import REQUIRED, SCHEMA, make_record, read_jsonl, write_jsonl

__all__ = ["REQUIRED", "SCHEMA", "make_record", "read_jsonl", "write_jsonl"]
