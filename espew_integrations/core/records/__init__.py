"""Records on disk: the audit's transcript and requery, the public evidence, the traffic sample."""
