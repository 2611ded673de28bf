"""The service's HTTP routes, one ``APIRouter`` per resource; ``privlm.service.app``
assembles them. Each reads the shared state through ``privlm.service.state.State``."""
