"""The live dashboard: a Dash app over a read-only store, served by waitress (`gapwatch dashboard`)."""
