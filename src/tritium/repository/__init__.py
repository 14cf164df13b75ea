"""Model repositories: layout scan, config.pbtxt parsing and normalisation, load manager."""
