"""The ``dmlbridge`` command line: its commands, the text reports they print (fitted to the terminal), and the
demo.

May import: everything below it.
"""
