"""The front end: source -> IR. Only this stage (and the fixes in io) sees LibCST; the relevance
scan and the prefilter read the `ast` tree.
"""
