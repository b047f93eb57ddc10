"""The one exception type a user can cause: the CLI prints its message as a single line."""


class GapwatchError(Exception):
    """A problem with the user's input or environment (a bad file, URL, run name, dead server).

    The message must name the input and say what is wrong, in one line, so the CLI can print it
    without a traceback.
    """
