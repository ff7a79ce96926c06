grammar Emmy;
file : EOF ;
