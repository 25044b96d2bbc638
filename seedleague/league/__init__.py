"""The league: which opponent each episode of each learning player meets, the payoff
table and ratings it keeps, and the snapshot pool they refer to."""
