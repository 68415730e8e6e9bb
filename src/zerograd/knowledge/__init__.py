"""What libraries do, as data: optimizer families and the frameworks that call backward, step
and clear around the user's hooks (each row cites its source).
"""
