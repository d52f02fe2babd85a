"""lm-eval's command line with the "scored" model registered (lm-eval has no model plugin discovery).

    python -m scored_client.lm_eval_cli run --model scored --model_args server=HOST:PORT --tasks wikitext
    scored-lm-eval ...        (the same, as an installed console script)
"""
import sys


def main() -> None:
    from scored_client._extras import require

    require("scored-lm-eval", "lm_eval", "lm-eval")
    import scored_client.lm_eval_adapter  # noqa: F401  (registers the "scored" model)
    from lm_eval.__main__ import cli_evaluate

    sys.exit(cli_evaluate())


if __name__ == "__main__":
    main()
