"""The trajectory/token core: data model, context tracking, merging, advantages.

Nothing in here imports torch; every backbone consumes these types.
"""
