"""Backends turn (messages, drafter, settings) into a stream of StepEvents: local engine today; vLLM and remote later."""
