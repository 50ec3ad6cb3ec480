"""`kvplan explain`: a parsed startup log (kvplan.spec.server_log) turned into the setup behind
it, the KV capacity it shows, where its memory went, and what-ifs in its own flags."""
