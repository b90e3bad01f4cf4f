"""Placing a model's constants: the options a caller gives (checked once), which constants are selected, and
where each goes in the upload image, as a plan entry with the desc DirectML sees.

May import: ``model``, ``tensor`` and below.
"""
