"""The fuzz suite (issue 29): hostile inputs run in child processes. See test_fuzz.py and harness.py."""
