"""`seedleague play`: a person plays a run's trained output in the browser; each finished game is a league result."""
