// Data layer sources are added by the data issue.
