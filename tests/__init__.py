"""tritium's tests. A package only so that their shared helpers import as ``tests.support``;
the test folders (unit/, integration/, fuzz/) are not packages."""
