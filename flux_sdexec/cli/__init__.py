"""``flux sdexec`` subcommands: one module each, registered in ``main.SUBCOMMANDS``."""
