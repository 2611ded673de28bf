"""privlm: differentially private adaptation and serving of large language models.

Layers (see ``docs/architecture.md``): ``models``, ``data`` and ``accounting`` are the
foundation; training, prediction, prompting, audit and the service build on them.
"""

from privlm.errors import BudgetExceededError, DataError, ModelLoadError, PrivlmError
from privlm.quiet import quiet_third_party_logs

quiet_third_party_logs()

__all__ = ["BudgetExceededError", "DataError", "ModelLoadError", "PrivlmError"]
__version__ = "0.1.0"
