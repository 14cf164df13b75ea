"""``tritium serve --workers N``: one supervisor process and N full-replica workers sharing
the listening sockets, with a control plane that keeps them one server to every client."""
