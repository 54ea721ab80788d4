"""The conformance oracle: check recorded run ledgers and transcripts against the spec, run by run."""

from __future__ import annotations
