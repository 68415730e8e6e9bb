"""Which modules belong together: a file's project, the plan of linked groups, linking them
into one program, and the cache that keeps what a run learnt.
"""
