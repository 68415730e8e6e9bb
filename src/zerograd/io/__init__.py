"""Bytes <-> text and findings <-> formats: discovering and reading files, notebooks, the
config, `# noqa`, reports, fixes and writing them back. Runs the engine over a project's files.
"""
