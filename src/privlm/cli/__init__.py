"""The ``privlm`` command line (Typer). Every command takes ``--json``."""

from __future__ import annotations

import typer

from privlm.cli import account, audit, data, detect, ensemble, ledger, models, plan, prompt, train
from privlm.cli.common import user_errors
from privlm.cli.perturb import perturb
from privlm.cli.predict import eval_app, generate
from privlm.cli.quickstart import quickstart
from privlm.cli.serve import app as service_app
from privlm.cli.serve import serve

app = typer.Typer(
    help="privlm: differentially private adaptation and serving of language models.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.add_typer(account.app, name="account")
app.add_typer(models.app, name="models")
app.add_typer(data.app, name="data")
app.add_typer(ledger.app, name="ledger")
app.add_typer(ensemble.app, name="ensemble")
app.add_typer(plan.app, name="plan")
app.add_typer(eval_app, name="eval")
app.add_typer(audit.app, name="audit")
app.add_typer(train.app, name="train")
app.add_typer(detect.app, name="detect")
app.add_typer(prompt.app, name="prompt")
app.command("generate")(user_errors(generate))
app.command("quickstart")(quickstart)
app.command("perturb")(perturb)
app.command("serve")(serve)
app.add_typer(service_app, name="service")


def main() -> None:
    app()


__all__ = ["app", "main"]
