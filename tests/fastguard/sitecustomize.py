"""Installs the fast loop's guard in a Python process a fast test starts
(privlm_fast_guard)."""

import privlm_fast_guard

privlm_fast_guard.install_from_environment()
