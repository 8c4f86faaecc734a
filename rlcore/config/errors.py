"""The one exception config problems raise."""


class ConfigError(ValueError):
    """A bad config: one line per problem, each naming the key (or file) and the fix.

    Entry points print it without a traceback and exit with status 2.
    """
