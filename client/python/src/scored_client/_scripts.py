"""Console-script entry points of the extras: each checks that its extra is installed first and otherwise
says which one to install (exit status 1) instead of failing with ModuleNotFoundError."""
from scored_client._extras import require


def lm_eval_main() -> None:
    """scored-lm-eval: lm-eval's command line with the "scored" model registered."""
    from scored_client.lm_eval_cli import main

    main()


def plot_main() -> None:
    """scored-plot: perplexity / KLD against bits per weight from scored-ppl reports."""
    require("scored-plot", "matplotlib", "plot")
    from scored_client.plot import main

    main()
