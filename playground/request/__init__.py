"""A run request, checked and resolved once before any model work, for every entry point (the app and its API, the
CLI, the server, the bench): `check.py` words every refusal of a run (`check_run`) and resolves what was asked into a
`ResolvedRequest` (the drafting method and k chosen, k auto included); `availability.py` says whether a preset can
run on this machine at all; `fit.py` whether a drafter fits a target, from their configs alone."""

from .availability import backend_unavailable_reason
from .check import (
    BackendUnavailable,
    RequestError,
    ResolvedRequest,
    check_preset_drafter,
    check_request,
    check_run,
    nonempty_prompt,
    require_local_engine_options,
    resolve_request,
)

__all__ = ["BackendUnavailable", "RequestError", "ResolvedRequest", "backend_unavailable_reason",
           "check_preset_drafter", "check_request", "check_run", "nonempty_prompt", "require_local_engine_options",
           "resolve_request"]
