"""The privlm service (paper 003): a multi-tenant FastAPI app with datasets
perturbed in the browser, durable DP jobs run by a worker process, and deployments whose
every private token is charged to a ledger before it is sent.

- ``db``: the SQLAlchemy schema (tenants, API keys, datasets, jobs, deployments).
- ``keys``: API keys, stored as SHA-256 hashes; tenants.
- ``datasets``: upload validation and per-tenant storage.
- ``jobs``: job kinds, their parameters and runners; ``worker``: the process that runs them.
- ``deployments``: private completions (PMixED / SubMix / adapter) with budgets.
- ``app``: the HTTP API and the perturbation page.
"""
