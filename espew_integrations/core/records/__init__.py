"""Records on disk: the audit transcript, its requery and the traffic sample."""
