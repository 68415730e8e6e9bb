"""IR -> verdicts, with no LibCST: the IR itself (model), control-flow graphs, the dataflow
and its summaries, and the rules' codes and messages. Testable on hand-built IR.
"""
