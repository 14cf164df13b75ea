"""The harness's only shim: Triton's `tritonserver` / `tritonfrontend` are tritium's."""

import tritium.compat

tritium.compat.install()
